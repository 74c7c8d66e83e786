"""svod's benchmarks, beside the package rather than in it: the harness behind ``svod bench``
(``harness``; a CUDA device's suite beside torch and Triton: ``cuda_report``), the peers svod is measured
beside (``peers``: numpy, numba, tinygrad), the kernel suite's sizes and peer spellings (``suite``,
``numba_kernels``), and the report (``results``). The kernels themselves are svod's (``svod.workloads``),
shared with the demo and the tests.
"""

import svod
from benchmarks import cuda_report, harness

__all__ = ["run_bench"]


def run_bench(device_name: str = "CPU", quick: bool = False, json_path: str | None = None,
              plot_path: str | None = None, suite: str | None = None, busy: bool = False) -> int:
    """``svod bench``: the suite and the peers on a CPU or OpenCL device (``harness``); a CUDA device's suite
    beside torch and Triton instead (``cuda_report``: a GPU's peers are not numpy's). ``suite``
    (``kernels`` or ``spellings``): that step alone. ``busy``: the suite quiet and beside a process that keeps
    a core busy (``busy``)."""
    if suite == "kernels" and svod.get_device(device_name).device.base_type == "CUDA":
        return cuda_report.report(svod.get_device(device_name).name, json_path, quick)
    return harness.run_bench(device_name, quick, json_path, plot_path, suite, busy)
