"""Running compiled kernels: the method cache and the cached kernel's checked dispatch."""

from svod.runtime.cache import CacheStats, KernelCache, default_cache
from svod.runtime.kernel import CachedKernel

__all__ = ["CacheStats", "CachedKernel", "KernelCache", "default_cache"]
