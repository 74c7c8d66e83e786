"""svod's benchmarks, beside the package rather than in it: the harness behind ``svod bench``
(``harness``), the peers svod is measured beside (``peers``: numpy, numba, tinygrad), the kernel suite's
sizes and peer spellings (``suite``, ``numba_kernels``), and the report (``results``). The kernels
themselves are svod's (``svod.workloads``), shared with the demo and the tests.
"""

from benchmarks.harness import run_bench

__all__ = ["run_bench"]
