"""Running compiled kernels: the method cache (memory and disk), checked dispatch, kernels of several
launches (``parts``), execution plans, their native replay on the CPU, bundles and profiles."""

from svod.runtime.cache import CacheStats, KernelCache, default_cache
from svod.runtime.disk import CacheWarning, DiskCache
from svod.runtime.kernel import CachedKernel
from svod.runtime.plan import ExecutionPlan, PreparedKernel, load_plan
from svod.runtime.profiler import StepProfile

__all__ = ["CacheStats", "CacheWarning", "CachedKernel", "DiskCache", "ExecutionPlan", "KernelCache", "PreparedKernel",
           "StepProfile", "default_cache", "load_plan"]
