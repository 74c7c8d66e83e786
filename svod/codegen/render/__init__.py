"""One renderer per language, each a ``base.KernelRenderer``: C, OpenCL C, CUDA C and WGSL share the
C-style walk (``cstyle``; the three GPU languages through its ``GPURenderer``), and LLVM IR (``llvmir``, with
``llvm_types``, ``llvm_metadata``, ``llvm_prefetch`` and ``llvm_unroll``) has its own. The PYTHON reference
device's renderer, which lowers nothing, lives with it in ``svod.backends.python``."""
